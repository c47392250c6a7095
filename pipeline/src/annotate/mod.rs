//! The annotation contract between any annotator and the validator, and the
//! [`Annotator`] trait with its file-backed implementation.
//!
//! Annotations are read leniently: a field with the wrong type does not
//! throw the record away, it becomes a problem on the tag or edge that
//! carries it (quarantined as `unparseable_annotation`), so the validator
//! can still say everything else that is wrong.

pub mod classifier;
pub mod sensitive;
pub mod sensitive_rules;
pub mod verdict;

use foldhash::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::os::unix::fs::{FileExt, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};
use tomlite_staging::Digest;

use crate::annotate::verdict::{EscapeShape, ParseClass, ReadAs};
use crate::ingest::bytes::{HashingRead, Stamp, Tally, read_line_capped};
use crate::ingest::record::{Record, Reject, json_type, sniff_record_id, truncate};

/// A label with its confidence (a record's affect or intensity).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scored {
    /// The label as the annotator wrote it.
    pub label: Option<String>,
    /// Its confidence in [0, 1].
    pub confidence: Option<f64>,
    /// Type problems found while reading it.
    pub problems: Vec<String>,
}

/// A quote with its byte offsets into the record text.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Quote {
    /// The quoted text.
    pub text: Option<String>,
    /// Start byte (inclusive).
    pub start: Option<u64>,
    /// End byte (exclusive).
    pub end: Option<u64>,
}

impl Quote {
    /// Whether the record text's bytes at `[start, end)` are exactly the
    /// (non-empty) quote.
    pub fn is_verbatim(&self, text: &str) -> bool {
        let (Some(q), Some(s), Some(e)) = (&self.text, self.start, self.end) else {
            return false;
        };
        if q.is_empty() || s > e || e > text.len() as u64 {
            return false;
        }
        &text.as_bytes()[s as usize..e as usize] == q.as_bytes()
    }

    /// Whether the annotator gave no quote at all.
    pub fn is_absent(&self) -> bool {
        self.text.as_deref().is_none_or(str::is_empty) && self.start.is_none() && self.end.is_none()
    }
}

/// A tom_kind tag candidate.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TagCandidate {
    /// The tom_kind as written.
    pub tom_kind: Option<String>,
    /// Its confidence.
    pub confidence: Option<f64>,
    /// The supporting quote.
    pub quote: Quote,
    /// Type problems found while reading it.
    pub problems: Vec<String>,
}

/// A graph edge candidate.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EdgeCandidate {
    /// Source node (defaults to `memory:<record id>`).
    pub source_node: Option<String>,
    /// Relation (a tom_kind).
    pub relation: Option<String>,
    /// Target node id.
    pub target_node: Option<String>,
    /// The mention in the text that named the target.
    pub target_mention: Option<String>,
    /// Confidence.
    pub confidence: Option<f64>,
    /// The supporting quote.
    pub quote: Quote,
    /// Type problems found while reading it.
    pub problems: Vec<String>,
}

/// Sensitive content an annotator found in a record.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sensitive {
    /// The category as written (one of `vocab::SENSITIVE_CATEGORIES`).
    pub category: Option<String>,
    /// P(sensitive) in [0, 1]; 1 for an identifier the rules found.
    pub confidence: Option<f64>,
    /// The sentence that triggered it, with its byte offsets.
    pub quote: Quote,
    /// What found it: `model`, or `rules:<kind>` (`rules:card_number`, ...).
    pub detector: Option<String>,
    /// Type problems found while reading it.
    pub problems: Vec<String>,
}

/// One record's annotation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Annotation {
    /// Who produced it.
    pub annotator: Option<String>,
    /// Tag candidates, primary first.
    pub tags: Vec<TagCandidate>,
    /// Affect labels (the contract allows one).
    pub affect: Vec<Scored>,
    /// Intensity labels (the contract allows one).
    pub intensity: Vec<Scored>,
    /// Edge candidates.
    pub edges: Vec<EdgeCandidate>,
    /// The annotator's best tom_kind when it abstained.
    pub best: Option<(String, f64)>,
    /// The record's embedding, int8-quantised, when the annotator made one
    /// (kept in the state for memory links).
    pub embedding: Option<Vec<i8>>,
    /// How the verdict parser read the raw output (`--raw-annotations`);
    /// `None` for the local classifier and an annotations file.
    pub read_as: Option<ReadAs>,
    /// Sensitive content the annotator detected (none: not detected).
    pub sensitive: Option<Sensitive>,
}

/// What an annotator said about one record.
// `Parsed` is the common case and lives only while its record is decided;
// boxing it would cost an allocation per record for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Annotated {
    /// Nothing: the record is abstained.
    Missing,
    /// An annotation to validate.
    Parsed(Annotation),
    /// Output that could not be read as an annotation; kept raw for the curator.
    Unparseable {
        /// The raw output.
        raw: String,
        /// Why it could not be read.
        error: String,
        /// How the verdict parser read it (`ANOMALY`, or the class of an
        /// annotation that names another record); `None` when the parser
        /// never saw it.
        read_as: Option<ReadAs>,
    },
}

impl Annotated {
    /// How the verdict parser read the record's raw output, if it did.
    pub fn read_as(&self) -> Option<ReadAs> {
        match self {
            Annotated::Missing => None,
            Annotated::Parsed(a) => a.read_as,
            Annotated::Unparseable { read_as, .. } => *read_as,
        }
    }
}

/// An annotator's identity, for receipts and the state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnotatorInfo {
    /// e.g. `file:data/sample/annotations.jsonl`.
    pub id: String,
    /// sha256 of the annotations file or of the model's weights.
    pub sha256: String,
}

/// Errors of an annotator as a whole (not of one record's annotation).
#[derive(Debug, thiserror::Error)]
pub enum AnnotateError {
    /// The model failed on a batch.
    #[error("the local classifier failed: {message}")]
    Model {
        /// The model's error.
        message: String,
    },
    /// The annotations file cannot be read.
    #[error("cannot read annotations {}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The annotations file is not a regular file (its lines are read back
    /// by offset).
    #[error(
        "annotations {} is {kind}, not a regular file: its lines are read back by position; write it to a file first",
        path.display()
    )]
    NotAFile {
        /// The file.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// The annotations file changed after it was indexed: its lines may no
    /// longer be the ones indexed, so nothing is committed from it.
    #[error(
        "annotations {} changed during the run ({what}); run again once the file is complete",
        path.display()
    )]
    Changed {
        /// The file.
        path: PathBuf,
        /// What changed.
        what: String,
    },
}

/// Anything that annotates records: the local classifier, or a file of
/// annotations made elsewhere. The validator trusts neither.
pub trait Annotator {
    /// Who this annotator is.
    fn info(&self) -> AnnotatorInfo;

    /// Digest of what the record's annotation depends on besides the
    /// record itself (the model's weights, or the annotation line): a
    /// record is skipped as unchanged only when this matches the state.
    fn annotation_digest(&mut self, record: &Record) -> Result<Digest, AnnotateError>;

    /// Annotates a batch of records, one result per record, in order.
    fn annotate(&mut self, records: &[&Record]) -> Result<Vec<Annotated>, AnnotateError>;

    /// Annotator output that belongs to no record (reported as rejects).
    fn input_problems(&mut self) -> Vec<Reject> {
        Vec::new()
    }

    /// The committed memories (their embeddings), given once before the
    /// first batch; annotators that propose no memory links ignore them.
    fn use_memories(&mut self, _memories: crate::graph::memory::MemoryIndex) {}

    /// How many records [`Annotator::annotate`] should get at once.
    fn batch_size(&self) -> usize {
        64
    }

    /// Annotations whose record never came (reported as rejects at the end).
    fn unused(&self) -> Vec<Reject> {
        Vec::new()
    }

    /// What the annotator did (tokens, truncations, ...), for the receipt.
    fn stats(&self) -> serde_json::Value {
        serde_json::Value::Null
    }

    /// Counts worth one status event once every input is read (the parse
    /// classes of raw output); `None` when the annotator has none.
    fn status_counts(&self) -> Option<serde_json::Value> {
        None
    }

    /// Called just before the commit: fails when an input of the annotator
    /// (a file of annotations) changed since it was read.
    fn check_unchanged(&self) -> Result<(), AnnotateError> {
        Ok(())
    }
}

/// Reads one annotation object leniently.
pub fn annotation_from_value(v: &Map<String, Value>) -> Result<Annotation, String> {
    let mut a = Annotation {
        annotator: v
            .get("annotator")
            .and_then(Value::as_str)
            .map(str::to_string),
        ..Default::default()
    };
    match v.get("tags") {
        None | Some(Value::Null) => {}
        Some(Value::Array(tags)) => {
            for (i, t) in tags.iter().enumerate() {
                let Value::Object(t) = t else {
                    return Err(format!(
                        "tags[{i}]: expected an object, found {}",
                        json_type(t)
                    ));
                };
                let mut problems = Vec::new();
                a.tags.push(TagCandidate {
                    tom_kind: string(t, "tom_kind", &mut problems),
                    confidence: confidence(t, "confidence", &mut problems),
                    quote: quote(t, &mut problems),
                    problems,
                });
            }
        }
        Some(other) => {
            return Err(format!(
                "tags: expected an array, found {}",
                json_type(other)
            ));
        }
    }
    for (key, out) in [("affect", &mut a.affect), ("intensity", &mut a.intensity)] {
        match v.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::Object(o)) => out.push(scored(o)),
            Some(Value::Array(xs)) => {
                for x in xs {
                    match x {
                        Value::Object(o) => out.push(scored(o)),
                        other => out.push(Scored {
                            problems: vec![format!(
                                "{key}: expected an object, found {}",
                                json_type(other)
                            )],
                            ..Default::default()
                        }),
                    }
                }
            }
            Some(Value::String(s)) => out.push(Scored {
                label: Some(s.clone()),
                confidence: None,
                problems: vec![format!("{key}: has no confidence")],
            }),
            Some(other) => {
                return Err(format!(
                    "{key}: expected an object, found {}",
                    json_type(other)
                ));
            }
        }
    }
    match v.get("edges") {
        None | Some(Value::Null) => {}
        Some(Value::Array(edges)) => {
            for (i, e) in edges.iter().enumerate() {
                let Value::Object(e) = e else {
                    return Err(format!(
                        "edges[{i}]: expected an object, found {}",
                        json_type(e)
                    ));
                };
                let mut problems = Vec::new();
                a.edges.push(EdgeCandidate {
                    source_node: string(e, "source_node", &mut problems),
                    relation: string(e, "relation", &mut problems),
                    target_node: string(e, "target_node", &mut problems),
                    target_mention: string(e, "target_mention", &mut problems),
                    confidence: confidence(e, "confidence", &mut problems),
                    quote: quote(e, &mut problems),
                    problems,
                });
            }
        }
        Some(other) => {
            return Err(format!(
                "edges: expected an array, found {}",
                json_type(other)
            ));
        }
    }
    if let (Some(Value::String(k)), Some(c)) = (
        v.get("best_tom_kind"),
        v.get("best_confidence").and_then(Value::as_f64),
    ) {
        a.best = Some((k.clone(), c));
    }
    match v.get("sensitive") {
        None | Some(Value::Null) => {}
        Some(Value::Object(o)) => {
            let mut problems = Vec::new();
            a.sensitive = Some(Sensitive {
                category: string(o, "category", &mut problems),
                confidence: confidence(o, "confidence", &mut problems),
                quote: Quote {
                    text: string(o, "quote", &mut problems),
                    start: offset(o, "quote_start", &mut problems),
                    end: offset(o, "quote_end", &mut problems),
                },
                detector: string(o, "detector", &mut problems),
                problems: problems
                    .into_iter()
                    .map(|p| format!("sensitive.{p}"))
                    .collect(),
            });
        }
        Some(other) => {
            return Err(format!(
                "sensitive: expected an object, found {}",
                json_type(other)
            ));
        }
    }
    Ok(a)
}

fn string(o: &Map<String, Value>, key: &str, problems: &mut Vec<String>) -> Option<String> {
    match o.get(key) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            problems.push(format!(
                "{key}: expected a string, found {}",
                json_type(other)
            ));
            None
        }
    }
}

fn confidence(o: &Map<String, Value>, key: &str, problems: &mut Vec<String>) -> Option<f64> {
    match o.get(key) {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => match n.as_f64() {
            Some(c) if (0.0..=1.0).contains(&c) => Some(c),
            _ => {
                problems.push(format!("{key}: {n} is outside [0, 1]"));
                None
            }
        },
        Some(other) => {
            problems.push(format!(
                "{key}: expected a number, found {}",
                json_type(other)
            ));
            None
        }
    }
}

fn offset(o: &Map<String, Value>, key: &str, problems: &mut Vec<String>) -> Option<u64> {
    match o.get(key) {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => match n.as_u64() {
            Some(x) => Some(x),
            None => {
                problems.push(format!("{key}: {n} is not a byte offset"));
                None
            }
        },
        Some(other) => {
            problems.push(format!(
                "{key}: expected an integer, found {}",
                json_type(other)
            ));
            None
        }
    }
}

fn quote(o: &Map<String, Value>, problems: &mut Vec<String>) -> Quote {
    Quote {
        text: string(o, "source_quote", problems),
        start: offset(o, "quote_start", problems),
        end: offset(o, "quote_end", problems),
    }
}

fn scored(o: &Map<String, Value>) -> Scored {
    let mut problems = Vec::new();
    Scored {
        label: string(o, "label", &mut problems),
        confidence: confidence(o, "confidence", &mut problems),
        problems,
    }
}

/// Parses one line of an annotations file.
pub fn parse_line(line: &str) -> Annotated {
    match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(m)) => match annotation_from_value(&m) {
            Ok(a) => Annotated::Parsed(a),
            Err(error) => Annotated::Unparseable {
                raw: line.to_string(),
                error,
                read_as: None,
            },
        },
        Ok(other) => Annotated::Unparseable {
            raw: line.to_string(),
            error: format!("expected a JSON object, found {}", json_type(&other)),
            read_as: None,
        },
        Err(e) => Annotated::Unparseable {
            raw: line.to_string(),
            error: format!("malformed JSON: {e}"),
            read_as: None,
        },
    }
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    offset: u64,
    len: u32,
    line: u64,
    used: bool,
    /// The line is longer than the cap: only its first `len` bytes are read.
    over: bool,
    /// The line is well-formed JSON with a string `record_id` (a line whose
    /// id was only sniffed from broken JSON gives way to a well-formed one).
    sound: bool,
    /// Digest of the `len` bytes indexed: what is read back for the record
    /// must be the same bytes.
    digest: u64,
}

/// Digest of an indexed line's bytes (within one process).
fn line_digest(bytes: &[u8]) -> u64 {
    use std::hash::BuildHasher as _;
    foldhash::quality::FixedState::with_seed(0x0074_6f6d_6c69_7465).hash_one(bytes)
}

/// What the lines of a [`FileAnnotator`] hold.
#[derive(Debug)]
enum Lines {
    /// Annotation objects (`--annotations`).
    Annotations,
    /// `{record_id, annotator, raw}` envelopes of raw output (`--raw-annotations`).
    Raw(RawStats),
}

/// What the verdict parser made of the raw lines of one run.
#[derive(Debug, Default, Clone)]
struct RawStats {
    classes: std::collections::BTreeMap<&'static str, u64>,
    shapes: std::collections::BTreeMap<&'static str, u64>,
    invalid_lines: u64,
    record_id_mismatches: u64,
    quotes_anchored: u64,
}

impl RawStats {
    fn new() -> Self {
        Self {
            classes: ParseClass::ALL.iter().map(|c| (c.as_str(), 0)).collect(),
            shapes: EscapeShape::ALL.iter().map(|s| (s.as_str(), 0)).collect(),
            ..Default::default()
        }
    }

    fn to_json(&self, lines: usize) -> Value {
        serde_json::json!({
            "lines": lines,
            "parse_classes": self.classes,
            "escape_shapes": self.shapes,
            "invalid_lines": self.invalid_lines,
            "record_id_mismatches": self.record_id_mismatches,
            "quotes_anchored": self.quotes_anchored,
        })
    }
}

/// A line read back for a record.
#[derive(Debug, Clone)]
struct LineOf {
    text: String,
    line: u64,
    over: bool,
}

/// Annotations from a JSONL file (`--annotations`), one object per record
/// keyed by `record_id`; or, opened with [`FileAnnotator::open_raw`], raw
/// annotator output (`--raw-annotations`) read by the [verdict
/// parser](crate::annotate::verdict).
///
/// The file is indexed once (record id → byte offset, a few dozen bytes a
/// record) and each record's line is read when the record comes, so memory
/// does not hold the annotations themselves.
#[derive(Debug)]
pub struct FileAnnotator {
    path: PathBuf,
    file: File,
    /// The file as it was indexed.
    stamp: Stamp,
    sha256: String,
    index: HashMap<Box<str>, Slot>,
    problems: Vec<Reject>,
    cache: Option<(String, LineOf)>,
    lines: Lines,
}

/// Longest annotation line kept (longer lines are reported, not read).
const MAX_LINE: usize = 4 << 20;

/// Longest raw-annotation line read whole; of a longer one the first
/// [`RAW_PREFIX_KEPT`] bytes are kept and its record is quarantined.
pub const MAX_RAW_LINE: usize = 16 << 20;

/// Bytes kept of a raw-annotation line longer than [`MAX_RAW_LINE`].
pub const RAW_PREFIX_KEPT: usize = 64 << 10;

impl FileAnnotator {
    /// Indexes the file, reading it once: its sha256 is of the bytes
    /// indexed, each line read back later is checked to be the same bytes,
    /// and [`Annotator::check_unchanged`] fails when the file was written to
    /// since. Lines with no readable `record_id` and earlier duplicates are
    /// reported through [`Annotator::input_problems`]; a line that is not
    /// well-formed JSON (its `record_id` sniffed) gives way to a well-formed
    /// line of the same record, before or after it, and is reported. A
    /// UTF-8 byte order mark is skipped; a UTF-16 file is one problem at
    /// line 0 and no annotation.
    pub fn open(path: &Path) -> Result<Self, AnnotateError> {
        Self::open_as(path, Lines::Annotations)
    }

    /// Indexes a file of raw annotator output: JSONL lines
    /// `{"record_id": "...", "annotator": "...", "raw": "<the output as returned>"}`.
    /// Each record's `raw` goes through [`crate::annotate::verdict::parse`]; an
    /// `ANOMALY` (or a line without a string `raw`) is quarantined with
    /// `unparseable_annotation` and its raw text kept.
    pub fn open_raw(path: &Path) -> Result<Self, AnnotateError> {
        Self::open_as(path, Lines::Raw(RawStats::new()))
    }

    fn open_as(path: &Path, lines: Lines) -> Result<Self, AnnotateError> {
        let raw_mode = matches!(lines, Lines::Raw(_));
        let cap = if raw_mode { MAX_RAW_LINE } else { MAX_LINE };
        let io = |source| AnnotateError::Io {
            path: path.to_path_buf(),
            source,
        };
        // Not blocking on a FIFO: it is refused below, unread.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(io)?;
        let before = file.metadata().map_err(io)?;
        if !before.is_file() {
            return Err(AnnotateError::NotAFile {
                path: path.to_path_buf(),
                kind: crate::ingest::bytes::file_kind(&before.file_type()),
            });
        }
        let before = Stamp::of(&before);
        let tally = Arc::new(Mutex::new(Tally::default()));
        let mut reader = BufReader::with_capacity(
            1 << 16,
            HashingRead::new(file.try_clone().map_err(io)?, tally.clone()),
        );
        let mut index: HashMap<Box<str>, Slot> = HashMap::default();
        let mut problems = Vec::new();
        let mut buf = Vec::new();
        let (mut offset, mut line) = (0u64, 0u64);
        let source = path.display().to_string();
        #[derive(serde::Deserialize)]
        struct Key<'a> {
            #[serde(borrow)]
            record_id: std::borrow::Cow<'a, str>,
        }
        loop {
            let start = offset;
            let Some(read) = read_line_capped(&mut reader, &mut buf, cap).map_err(io)? else {
                break;
            };
            let over = read.over;
            line += 1;
            offset += read.consumed;
            let mut start = start;
            if line == 1 {
                if let Some(what) = crate::ingest::bytes::utf16(&buf) {
                    problems.push(Reject {
                        source: source.clone(),
                        line: 0,
                        record_id: None,
                        field: None,
                        error: format!("{what}; the file is not read"),
                    });
                    // Hashed to the end all the same.
                    while read_line_capped(&mut reader, &mut buf, cap)
                        .map_err(io)?
                        .is_some()
                    {}
                    break;
                }
                if crate::ingest::bytes::strip_utf8_bom(&mut buf) {
                    start += crate::ingest::bytes::UTF8_BOM.len() as u64;
                }
            }
            if !over && buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let mut problem = |record_id: Option<String>, field: &str, error: String| {
                problems.push(Reject {
                    source: source.clone(),
                    line,
                    record_id,
                    field: Some(field.to_string()),
                    error,
                })
            };
            if over && !raw_mode {
                problem(
                    sniff_record_id(&buf, "record_id"),
                    "record_id",
                    format!("annotation line longer than {MAX_LINE} bytes"),
                );
                continue;
            }
            let parsed = if over {
                None
            } else {
                Some(serde_json::from_slice::<Key>(&buf))
            };
            let (id, sound) = match parsed {
                Some(Ok(k)) => (Some(k.record_id.into_owned()), true),
                _ => (sniff_record_id(&buf, "record_id"), false),
            };
            let Some(id) = id.filter(|s| !s.is_empty()) else {
                problem(
                    None,
                    "record_id",
                    if over {
                        format!("annotation line longer than {cap} bytes with no record_id in them")
                    } else {
                        "annotation line has no readable record_id".into()
                    },
                );
                continue;
            };
            let len = if over {
                RAW_PREFIX_KEPT.min(buf.len())
            } else {
                buf.len()
            };
            let slot = Slot {
                offset: start,
                len: len as u32,
                line,
                used: false,
                over,
                sound,
                digest: line_digest(&buf[..len]),
            };
            let malformed = |l: u64, kept: u64| {
                format!(
                    "annotation line {l} is not well-formed JSON; line {kept}, well-formed, is used for this record"
                )
            };
            match index.get(id.as_str()) {
                // A broken line does not take a record's place from a sound one.
                Some(prev) if prev.sound && !sound => {
                    let prev_line = prev.line;
                    problem(Some(id), "record_id", malformed(line, prev_line));
                }
                Some(prev) => {
                    let (prev_line, prev_sound) = (prev.line, prev.sound);
                    problem(
                        Some(id.clone()),
                        "record_id",
                        if sound && !prev_sound {
                            malformed(prev_line, line)
                        } else {
                            format!(
                                "duplicate annotation for this record; line {line} is used instead of line {prev_line}"
                            )
                        },
                    );
                    let last = problems.len() - 1;
                    problems[last].line = prev_line;
                    index.insert(id.into(), slot);
                }
                None => {
                    index.insert(id.into(), slot);
                }
            }
        }
        drop(reader);
        let sha256 = tally.lock().unwrap_or_else(|p| p.into_inner()).hex();
        let this = Self {
            path: path.to_path_buf(),
            stamp: before,
            file,
            sha256,
            index,
            problems,
            cache: None,
            lines,
        };
        // Written to while it was indexed: offsets may not match the file.
        this.check_unchanged()?;
        Ok(this)
    }

    fn unused_lines(&self) -> Vec<Reject> {
        let mut out: Vec<Reject> = self
            .index
            .iter()
            .filter(|(_, s)| !s.used)
            .map(|(id, s)| Reject {
                source: self.path.display().to_string(),
                line: s.line,
                record_id: Some(id.to_string()),
                field: Some("record_id".into()),
                error: "annotation for a record that is not in the input (or was rejected)".into(),
            })
            .collect();
        out.sort_by_key(|r| r.line);
        out
    }

    /// Number of annotation lines indexed.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether the file holds no annotation.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    fn line_for(&mut self, record_id: &str) -> Result<Option<LineOf>, AnnotateError> {
        if let Some((id, line)) = &self.cache
            && id == record_id
        {
            return Ok(Some(line.clone()));
        }
        let Some(slot) = self.index.get_mut(record_id) else {
            return Ok(None);
        };
        slot.used = true;
        let mut buf = vec![0u8; slot.len as usize];
        self.file
            .read_exact_at(&mut buf, slot.offset)
            .map_err(|source| AnnotateError::Io {
                path: self.path.clone(),
                source,
            })?;
        if line_digest(&buf) != slot.digest {
            let now = sniff_record_id(&buf, "record_id")
                .map(|id| format!("record `{id}`"))
                .unwrap_or_else(|| "no readable record_id".into());
            return Err(AnnotateError::Changed {
                path: self.path.clone(),
                what: format!(
                    "line {} no longer holds the annotation of record `{record_id}` that was indexed there; it now reads {now}",
                    slot.line
                ),
            });
        }
        let line = LineOf {
            text: String::from_utf8_lossy(&buf).into_owned(),
            line: slot.line,
            over: slot.over,
        };
        self.cache = Some((record_id.to_string(), line.clone()));
        Ok(Some(line))
    }

    /// Reads one raw-annotation line for `record` through the verdict parser.
    fn parse_raw(&mut self, record: &Record, l: &LineOf) -> Annotated {
        let Lines::Raw(stats) = &mut self.lines else {
            return parse_line(&l.text);
        };
        let at = format!(
            "{} line {} (record {})",
            self.path.display(),
            l.line,
            record.id
        );
        let mut invalid = |raw: &str, error: String| {
            stats.invalid_lines += 1;
            Annotated::Unparseable {
                raw: raw.to_string(),
                error,
                read_as: None,
            }
        };
        if l.over {
            return invalid(
                &l.text,
                format!(
                    "{at}: longer than {MAX_RAW_LINE} bytes; only its first {} bytes are kept as raw",
                    l.text.len()
                ),
            );
        }
        let envelope = match serde_json::from_str::<Value>(&l.text) {
            Ok(Value::Object(m)) => m,
            Ok(other) => {
                return invalid(
                    &l.text,
                    format!("{at}: expected a JSON object, found {}", json_type(&other)),
                );
            }
            Err(e) => return invalid(&l.text, format!("{at}: malformed JSON: {e}")),
        };
        let raw = match envelope.get("raw") {
            Some(Value::String(s)) => s,
            None => return invalid(&l.text, format!("{at}: field `raw`: missing")),
            Some(other) => {
                return invalid(
                    &l.text,
                    format!(
                        "{at}: field `raw`: expected a string, found {}",
                        json_type(other)
                    ),
                );
            }
        };
        let annotator = match envelope.get("annotator") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                return invalid(
                    &l.text,
                    format!(
                        "{at}: field `annotator`: expected a string, found {}",
                        json_type(other)
                    ),
                );
            }
        };
        let verdict = crate::annotate::verdict::parse(raw);
        let read_as = verdict.read_as();
        *stats.classes.entry(verdict.class.as_str()).or_default() += 1;
        if let Some(shape) = verdict.shape {
            *stats.shapes.entry(shape.as_str()).or_default() += 1;
        }
        let Some(mut a) = verdict.annotation else {
            return Annotated::Unparseable {
                raw: raw.clone(),
                error: format!("{at}: ANOMALY: {}", verdict.error.unwrap_or_default()),
                read_as: Some(read_as),
            };
        };
        if let Some(Value::String(id)) = verdict.object.as_ref().and_then(|o| o.get("record_id"))
            && *id != record.id
        {
            stats.record_id_mismatches += 1;
            return Annotated::Unparseable {
                raw: raw.clone(),
                error: format!(
                    "{at}: field `record_id`: the {} annotation names record `{id}`",
                    verdict.class.as_str()
                ),
                read_as: Some(read_as),
            };
        }
        if a.annotator.is_none() {
            a.annotator = annotator;
        }
        a.read_as = Some(read_as);
        stats.quotes_anchored +=
            crate::annotate::verdict::anchor_quotes(&mut a, &record.text) as u64;
        Annotated::Parsed(a)
    }
}

impl Annotator for FileAnnotator {
    fn info(&self) -> AnnotatorInfo {
        let kind = match self.lines {
            Lines::Annotations => "file",
            Lines::Raw(_) => "raw",
        };
        AnnotatorInfo {
            id: format!("{kind}:{}", self.path.display()),
            sha256: self.sha256.clone(),
        }
    }

    fn annotation_digest(&mut self, record: &Record) -> Result<Digest, AnnotateError> {
        let line = self.line_for(&record.id)?;
        let mut h = Sha256::new();
        if let Lines::Raw(_) = self.lines {
            // What the parser makes of a line is part of the annotation.
            h.update(b"raw-verdict-v1\0");
        }
        match line {
            Some(l) => {
                h.update(b"line\0");
                h.update(l.text.as_bytes());
            }
            None => h.update(b"missing\0"),
        }
        Ok(truncate(h.finalize().as_slice()))
    }

    fn annotate(&mut self, records: &[&Record]) -> Result<Vec<Annotated>, AnnotateError> {
        let mut out = Vec::with_capacity(records.len());
        for r in records {
            out.push(match self.line_for(&r.id)? {
                None => Annotated::Missing,
                Some(line) => match self.lines {
                    Lines::Annotations => parse_line(&line.text),
                    Lines::Raw(_) => self.parse_raw(r, &line),
                },
            });
        }
        Ok(out)
    }

    fn input_problems(&mut self) -> Vec<Reject> {
        std::mem::take(&mut self.problems)
    }

    fn check_unchanged(&self) -> Result<(), AnnotateError> {
        let now = self.file.metadata().map_err(|source| AnnotateError::Io {
            path: self.path.clone(),
            source,
        })?;
        match self.stamp.changed(&Stamp::of(&now)) {
            Some(what) => Err(AnnotateError::Changed {
                path: self.path.clone(),
                what,
            }),
            None => Ok(()),
        }
    }

    fn unused(&self) -> Vec<Reject> {
        self.unused_lines()
    }

    fn stats(&self) -> Value {
        match &self.lines {
            Lines::Annotations => Value::Null,
            Lines::Raw(s) => serde_json::json!({"raw_annotations": s.to_json(self.index.len())}),
        }
    }

    fn status_counts(&self) -> Option<Value> {
        match &self.lines {
            Lines::Annotations => None,
            Lines::Raw(s) => Some(s.to_json(self.index.len())),
        }
    }
}

/// An annotation in DESIGN.md's JSON shape (what `--annotations` reads).
pub fn annotation_to_json(record_id: &str, a: &Annotation) -> Value {
    let quote = |q: &Quote| serde_json::json!({"source_quote": q.text, "quote_start": q.start, "quote_end": q.end});
    let scored = |s: &[Scored]| {
        s.first()
            .map(|s| serde_json::json!({"label": s.label, "confidence": s.confidence}))
            .unwrap_or(Value::Null)
    };
    let mut m = serde_json::json!({
        "record_id": record_id,
        "annotator": a.annotator,
        "tags": a.tags.iter().map(|t| {
            let mut v = serde_json::json!({"tom_kind": t.tom_kind, "confidence": t.confidence});
            if let (Value::Object(o), Value::Object(q)) = (&mut v, quote(&t.quote)) {
                o.extend(q);
            }
            v
        }).collect::<Vec<_>>(),
        "affect": scored(&a.affect),
        "intensity": scored(&a.intensity),
        "edges": a.edges.iter().map(|e| {
            let mut v = serde_json::json!({"source_node": e.source_node, "relation": e.relation,
                "target_node": e.target_node, "target_mention": e.target_mention, "confidence": e.confidence});
            if let (Value::Object(o), Value::Object(q)) = (&mut v, quote(&e.quote)) {
                o.extend(q);
            }
            v
        }).collect::<Vec<_>>(),
    });
    if let (Some((k, c)), Value::Object(o)) = (&a.best, &mut m) {
        o.insert("best_tom_kind".into(), Value::from(k.clone()));
        o.insert("best_confidence".into(), Value::from(*c));
    }
    if let (Some(s), Value::Object(o)) = (&a.sensitive, &mut m) {
        o.insert(
            "sensitive".into(),
            serde_json::json!({
                "category": s.category,
                "confidence": s.confidence,
                "quote": s.quote.text,
                "quote_start": s.quote.start,
                "quote_end": s.quote.end,
                "detector": s.detector,
            }),
        );
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbatim_means_the_bytes_at_the_offsets() {
        let text = "Café — keep it short.";
        let start = text.find("keep").unwrap() as u64;
        let q = |s: u64, e: u64, t: &str| Quote {
            text: Some(t.into()),
            start: Some(s),
            end: Some(e),
        };
        assert!(q(start, start + 4, "keep").is_verbatim(text));
        // Character offsets are not byte offsets on multi-byte text.
        let chars = text
            .chars()
            .take_while(|_| true)
            .position(|c| c == 'k')
            .unwrap() as u64;
        assert_ne!(chars, start);
        assert!(!q(chars, chars + 4, "keep").is_verbatim(text));
        assert!(!q(0, 0, "").is_verbatim(text));
        assert!(!q(start, 999, "keep").is_verbatim(text));
        assert!(!q(5, 3, "keep").is_verbatim(text));
    }

    #[test]
    fn mistyped_fields_become_problems_not_lost_records() {
        let a = match parse_line(
            r#"{"record_id":"r","tags":[{"tom_kind":"goal","confidence":"high","source_quote":"x","quote_start":-1,"quote_end":1}],
               "affect":{"label":"neutral","confidence":1.5}}"#,
        ) {
            Annotated::Parsed(a) => a,
            other => panic!("{other:?}"),
        };
        assert_eq!(a.tags[0].tom_kind.as_deref(), Some("goal"));
        assert_eq!(a.tags[0].problems.len(), 2, "{:?}", a.tags[0].problems);
        assert_eq!(a.affect[0].problems, ["confidence: 1.5 is outside [0, 1]"]);
    }

    #[test]
    fn broken_shapes_are_unparseable() {
        assert!(matches!(
            parse_line(r#"{"record_id":"r","tags":{"#),
            Annotated::Unparseable { .. }
        ));
        assert!(matches!(
            parse_line(r#"{"record_id":"r","tags":5}"#),
            Annotated::Unparseable { .. }
        ));
        assert!(matches!(parse_line("[1]"), Annotated::Unparseable { .. }));
    }
}
