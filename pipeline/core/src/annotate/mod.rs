//! The annotation contract between any annotator and the validator, and the
//! [`Annotator`] trait; [`mod@file`] reads annotations made elsewhere,
//! [`classifier`] makes them, [`verdict`] parses raw annotator output.
//!
//! Annotations are read leniently: a field with the wrong type does not
//! throw the record away, it becomes a problem on the tag or edge that
//! carries it (quarantined as `unparseable_annotation`), so the validator
//! can still say everything else that is wrong.

pub mod classifier;
pub mod credential_rules;
pub mod file;
pub mod read_as;
pub mod safety_rules;
pub mod sensitive;
pub mod sensitive_rules;
pub mod verdict;
pub mod with_rules;

use std::path::PathBuf;

use serde_json::{Map, Value};
use tomlite_staging::Digest;

use crate::annotate::read_as::ReadAs;
use crate::ingest::record::{Record, Reject, json_type};

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
    /// What found it: `model`, or `rules:<rule id>` (`rules:identifier.card_number`, ...).
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

    /// The sensitive content detectors that ran on the records this
    /// annotator annotated (`model`, `rules:<version>`), for the receipt;
    /// empty when none did.
    fn sensitive_detectors(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Reads one annotation object leniently.
pub fn annotation_from_value(fields: &Map<String, Value>) -> Result<Annotation, String> {
    let tags = objects_of(fields, "tags", tag_candidate)?;
    let affect = scored_of(fields, "affect")?;
    let intensity = scored_of(fields, "intensity")?;
    let edges = objects_of(fields, "edges", edge_candidate)?;
    let best = match (
        fields.get("best_tom_kind"),
        fields.get("best_confidence").and_then(Value::as_f64),
    ) {
        (Some(Value::String(kind)), Some(confidence)) => Some((kind.clone(), confidence)),
        _ => None,
    };
    let sensitive = match fields.get("sensitive") {
        None | Some(Value::Null) => None,
        Some(Value::Object(found)) => Some(sensitive_of(found)),
        Some(other) => {
            return Err(format!(
                "sensitive: expected an object, found {}",
                json_type(other)
            ));
        }
    };
    Ok(Annotation {
        annotator: fields
            .get("annotator")
            .and_then(Value::as_str)
            .map(str::to_string),
        tags,
        affect,
        intensity,
        edges,
        best,
        sensitive,
        ..Default::default()
    })
}

/// The array of objects at `key`, each read by `read` (empty when it is
/// absent or null); an item that is not an object fails the annotation.
fn objects_of<T>(
    fields: &Map<String, Value>,
    key: &str,
    read: fn(&Map<String, Value>) -> T,
) -> Result<Vec<T>, String> {
    match fields.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(index, item)| match item {
                Value::Object(object) => Ok(read(object)),
                other => Err(format!(
                    "{key}[{index}]: expected an object, found {}",
                    json_type(other)
                )),
            })
            .collect(),
        Some(other) => Err(format!(
            "{key}: expected an array, found {}",
            json_type(other)
        )),
    }
}

/// A tag object read leniently: type problems stay on the tag.
fn tag_candidate(tag: &Map<String, Value>) -> TagCandidate {
    let mut problems = Vec::new();
    TagCandidate {
        tom_kind: string(tag, "tom_kind", &mut problems),
        confidence: confidence(tag, "confidence", &mut problems),
        quote: quote(tag, &mut problems),
        problems,
    }
}

/// An edge object read leniently: type problems stay on the edge.
fn edge_candidate(edge: &Map<String, Value>) -> EdgeCandidate {
    let mut problems = Vec::new();
    EdgeCandidate {
        source_node: string(edge, "source_node", &mut problems),
        relation: string(edge, "relation", &mut problems),
        target_node: string(edge, "target_node", &mut problems),
        target_mention: string(edge, "target_mention", &mut problems),
        confidence: confidence(edge, "confidence", &mut problems),
        quote: quote(edge, &mut problems),
        problems,
    }
}

/// The labels at `key` (`affect` or `intensity`): one object, an array of
/// them, or a bare label (kept, with the problem that it has no confidence).
fn scored_of(fields: &Map<String, Value>, key: &str) -> Result<Vec<Scored>, String> {
    let not_an_object =
        |other: &Value| format!("{key}: expected an object, found {}", json_type(other));
    match fields.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Object(object)) => Ok(vec![scored(object)]),
        Some(Value::Array(items)) => Ok(items
            .iter()
            .map(|item| match item {
                Value::Object(object) => scored(object),
                other => Scored {
                    problems: vec![not_an_object(other)],
                    ..Default::default()
                },
            })
            .collect()),
        Some(Value::String(label)) => Ok(vec![Scored {
            label: Some(label.clone()),
            confidence: None,
            problems: vec![format!("{key}: has no confidence")],
        }]),
        Some(other) => Err(not_an_object(other)),
    }
}

/// The `sensitive` object read leniently; its problems are prefixed `sensitive.`.
fn sensitive_of(found: &Map<String, Value>) -> Sensitive {
    let mut problems = Vec::new();
    Sensitive {
        category: string(found, "category", &mut problems),
        confidence: confidence(found, "confidence", &mut problems),
        quote: Quote {
            text: string(found, "quote", &mut problems),
            start: offset(found, "quote_start", &mut problems),
            end: offset(found, "quote_end", &mut problems),
        },
        detector: string(found, "detector", &mut problems),
        problems: problems
            .into_iter()
            .map(|problem| format!("sensitive.{problem}"))
            .collect(),
    }
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

/// An annotation in docs/design.md's JSON shape (what `--annotations` reads).
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
