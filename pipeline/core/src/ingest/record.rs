//! Input records: their types, the field rules every reader applies
//! ([`record_from_map`]), and what a reader yields.
//!
//! Every source is streamed: an iterator yields one [`Item`] at a time, a
//! valid [`Record`] or a [`Reject`] that names the source, the 1-based line
//! (or row), the record id when known, the field and the error.

use std::path::PathBuf;

use chrono::{DateTime, NaiveDate, SecondsFormat, Utc};
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};
use tomlite_staging::Digest;

/// The three kinds of record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// A journal entry.
    Journal,
    /// A summary of a work or chat session.
    SessionSummary,
    /// A stored persona memory.
    PersonaMemory,
}

impl RecordKind {
    /// The kind as the input spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordKind::Journal => "journal",
            RecordKind::SessionSummary => "session_summary",
            RecordKind::PersonaMemory => "persona_memory",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "journal" => Some(Self::Journal),
            "session_summary" => Some(Self::SessionSummary),
            "persona_memory" => Some(Self::PersonaMemory),
            _ => None,
        }
    }
}

/// A record's fields, as every reader names them (JSONL keys, Parquet
/// columns); a reject's `field` is one of them.
pub const RECORD_FIELDS: [&str; 8] = [
    "id",
    "persona_id",
    "kind",
    "source_path",
    "created_at",
    "text",
    "flags",
    "user_id",
];

/// The fields a record cannot do without: the first six of [`RECORD_FIELDS`].
pub const REQUIRED_FIELDS: [&str; 6] = [
    "id",
    "persona_id",
    "kind",
    "source_path",
    "created_at",
    "text",
];

/// The record flags that make a record untouchable without a curator.
pub const FLAGS: [&str; 2] = ["sensitive", "safety"];

/// A valid input record.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Unique, stable id.
    pub id: String,
    /// The persona the memory belongs to.
    pub persona_id: String,
    /// What kind of record it is.
    pub kind: RecordKind,
    /// The source anchor.
    pub source_path: String,
    /// RFC3339 timestamp, as given.
    pub created_at: String,
    /// The text; quotes are byte ranges of it.
    pub text: String,
    /// `sensitive` and/or `safety`.
    pub flags: Vec<String>,
    /// The user the record is about, if any.
    pub user_id: Option<String>,
    /// Where the record came from.
    pub origin: Origin,
}

/// A record's place in its input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The input file.
    pub source: String,
    /// 1-based line (JSONL), row (Parquet) or 1 (a journal file).
    pub line: u64,
}

impl Record {
    /// Digest of everything that defines the record: content and metadata
    /// (not its position in the input).
    pub fn fingerprint(&self) -> Digest {
        let mut h = Sha256::new();
        let mut flags = self.flags.clone();
        flags.sort();
        for part in [
            self.id.as_str(),
            self.persona_id.as_str(),
            self.kind.as_str(),
            self.source_path.as_str(),
            self.created_at.as_str(),
            self.user_id.as_deref().unwrap_or("\u{0}"),
            &flags.join("\u{1e}"),
            self.text.as_str(),
        ] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        truncate(h.finalize().as_slice())
    }

    /// Whether the record is flagged `sensitive` or `safety`.
    pub fn is_sensitive(&self) -> bool {
        !self.flags.is_empty()
    }
}

/// First 16 bytes of a sha256.
pub fn truncate(sha: &[u8]) -> Digest {
    let mut d = [0u8; 16];
    d.copy_from_slice(&sha[..16]);
    d
}

/// An input line, row or file that is not a valid record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject {
    /// The input file.
    pub source: String,
    /// 1-based line or row; 0 when the whole file is rejected (a Parquet
    /// file that cannot be read or has the wrong schema, a compressed or
    /// binary file given as JSONL).
    pub line: u64,
    /// The record id, when it could be read.
    pub record_id: Option<String>,
    /// The offending field, when one is to blame.
    pub field: Option<String>,
    /// What is wrong.
    pub error: String,
}

/// What an input yields.
#[derive(Debug)]
pub enum Item {
    /// A valid record.
    Record(Box<Record>),
    /// A line, row or file that is not one.
    Reject(Reject),
}

/// An input that cannot be read at all (as opposed to a bad line in it).
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The file or folder cannot be read.
    #[error("cannot read input {}", path.display())]
    Io {
        /// The input.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The Parquet file cannot be decoded.
    #[error("cannot read Parquet input {}", path.display())]
    Parquet {
        /// The input.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// A Parquet batch cannot be decoded.
    #[error("cannot decode Parquet input {}", path.display())]
    Arrow {
        /// The input.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: arrow_schema::ArrowError,
    },
    /// A journal file sits at the root of the folder and no persona was given.
    #[error("journal folder {}: {message}", path.display())]
    Journal {
        /// The folder.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The input is something that cannot be read as one (a device; a
    /// Parquet input that is a pipe).
    #[error("input {}: {message}", path.display())]
    NotAFile {
        /// The input.
        path: PathBuf,
        /// What it is and what to do.
        message: String,
    },
    /// The file changed while it was read: what was read may mix two
    /// versions of it, so nothing from it is committed.
    #[error(
        "input {} changed while it was read ({what}); run again once it is complete",
        path.display()
    )]
    Changed {
        /// The file.
        path: PathBuf,
        /// What changed.
        what: String,
    },
}

/// How records are checked.
#[derive(Debug, Clone)]
pub struct IngestOptions {
    /// Longest accepted text, in bytes.
    pub max_text_bytes: u64,
    /// Persona of journal files that sit directly in the folder.
    pub journal_persona: Option<String>,
}

impl Default for IngestOptions {
    fn default() -> Self {
        Self {
            max_text_bytes: 32 * 1024,
            journal_persona: None,
        }
    }
}

/// The stream of one input.
pub type Items = Box<dyn Iterator<Item = Result<Item, IngestError>>>;

/// The sha256 of an input, of the bytes its records were read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputSha {
    /// sha256, hex.
    pub sha256: String,
    /// Bytes hashed (a folder: of its journal files).
    pub bytes: u64,
}

impl InputSha {
    /// The sha256 of no bytes: an input of which nothing was read (a pipe
    /// that never opened before the time budget ran short).
    pub fn of_nothing() -> Self {
        Self {
            sha256: crate::ingest::bytes::Tally::default().hex(),
            bytes: 0,
        }
    }
}

/// The name of a JSON value's type, for messages.
pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Finds `"<key>": "<value>"` in a line that is not valid JSON, so that a
/// reject can still name its record.
pub fn sniff_record_id(line: &[u8], key: &str) -> Option<String> {
    let text = String::from_utf8_lossy(line);
    let needle = format!("\"{key}\"");
    let mut from = 0;
    while let Some(i) = text[from..].find(&needle) {
        let rest = text[from + i + needle.len()..].trim_start();
        if let Some(rest) = rest.strip_prefix(':') {
            let rest = rest.trim_start();
            if let Some(rest) = rest.strip_prefix('"') {
                let end = rest.find(['"', '\\'])?;
                if rest.as_bytes()[end] == b'"' && end > 0 {
                    return Some(rest[..end].to_string());
                }
                return None;
            }
        }
        from += i + needle.len();
    }
    None
}

/// Checks one record given as a JSON object (a JSONL line, a Parquet row or a
/// journal file), field by field; the first broken field is reported.
pub fn record_from_map(
    obj: &Map<String, Value>,
    origin: Origin,
    opts: &IngestOptions,
) -> Result<Record, Reject> {
    match RecordFields::read(obj, opts.max_text_bytes) {
        Ok(fields) => Ok(fields.into_record(origin)),
        Err((field, error)) => Err(Reject {
            record_id: obj
                .get("id")
                .and_then(Value::as_str)
                .filter(|id| !id.is_empty())
                .map(str::to_string),
            source: origin.source,
            line: origin.line,
            field: Some(field.to_string()),
            error,
        }),
    }
}

/// A broken field of a record: its name and what is wrong.
type FieldError = (&'static str, String);

/// The checked fields of one record, borrowed from its JSON object.
struct RecordFields<'a> {
    id: &'a str,
    persona_id: &'a str,
    kind: RecordKind,
    source_path: &'a str,
    created_at: &'a str,
    text: &'a str,
    flags: Vec<String>,
    user_id: Option<String>,
}

impl<'a> RecordFields<'a> {
    /// Checks the fields in the order their errors are reported.
    fn read(obj: &'a Map<String, Value>, max_text_bytes: u64) -> Result<Self, FieldError> {
        let id = required_str(obj, "id")?;
        let persona_id = required_str(obj, "persona_id")?;
        let kind = record_kind(obj)?;
        let source_path = required_str(obj, "source_path")?;
        let created_at = required_str(obj, "created_at")?;
        DateTime::parse_from_rfc3339(created_at).map_err(|error| {
            (
                "created_at",
                format!("`{created_at}` is not an RFC3339 timestamp: {error}"),
            )
        })?;
        Ok(Self {
            id,
            persona_id,
            kind,
            source_path,
            created_at,
            text: record_text(obj, max_text_bytes)?,
            flags: record_flags(obj)?,
            user_id: optional_user_id(obj)?,
        })
    }

    /// The record, owning its fields, read at `origin`.
    fn into_record(self, origin: Origin) -> Record {
        Record {
            id: self.id.to_string(),
            persona_id: self.persona_id.to_string(),
            kind: self.kind,
            source_path: self.source_path.to_string(),
            created_at: self.created_at.to_string(),
            text: self.text.to_string(),
            flags: self.flags,
            user_id: self.user_id,
            origin,
        }
    }
}

/// A string field that must be present and not blank.
fn required_str<'a>(
    obj: &'a Map<String, Value>,
    field: &'static str,
) -> Result<&'a str, FieldError> {
    match obj.get(field) {
        None | Some(Value::Null) => Err((field, "missing required field".into())),
        Some(Value::String(value)) if value.trim().is_empty() => {
            Err((field, "must not be empty".into()))
        }
        Some(Value::String(value)) => Ok(value.as_str()),
        Some(other) => Err((
            field,
            format!("expected a string, found {}", json_type(other)),
        )),
    }
}

/// `kind`: one of the three record kinds.
fn record_kind(obj: &Map<String, Value>) -> Result<RecordKind, FieldError> {
    let kind = required_str(obj, "kind")?;
    RecordKind::parse(kind).ok_or_else(|| {
        (
            "kind",
            format!("unknown kind `{kind}` (expected journal, session_summary or persona_memory)"),
        )
    })
}

/// `text`: present, not blank, at most `max_text_bytes` long.
fn record_text(obj: &Map<String, Value>, max_text_bytes: u64) -> Result<&str, FieldError> {
    let text = match obj.get("text") {
        None | Some(Value::Null) => return Err(("text", "missing required field".into())),
        Some(Value::String(text)) => text,
        Some(other) => {
            return Err((
                "text",
                format!("expected a string, found {}", json_type(other)),
            ));
        }
    };
    if text.trim().is_empty() {
        return Err(("text", "must not be empty".into()));
    }
    if text.len() as u64 > max_text_bytes {
        return Err((
            "text",
            format!(
                "{} bytes, over the limit of {max_text_bytes} bytes (rejected, not truncated)",
                text.len()
            ),
        ));
    }
    Ok(text)
}

/// `flags`: absent, or a list of known flags (repeats kept once).
fn record_flags(obj: &Map<String, Value>) -> Result<Vec<String>, FieldError> {
    let items = match obj.get("flags") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err((
                "flags",
                format!("expected a list of strings, found {}", json_type(other)),
            ));
        }
    };
    let mut flags = Vec::with_capacity(items.len());
    for item in items {
        match item.as_str() {
            Some(flag) if FLAGS.contains(&flag) => {
                if !flags.iter().any(|kept| kept == flag) {
                    flags.push(flag.to_string());
                }
            }
            Some(flag) => {
                return Err((
                    "flags",
                    format!("unknown flag `{flag}` (expected sensitive or safety)"),
                ));
            }
            None => {
                return Err((
                    "flags",
                    format!("expected strings, found {}", json_type(item)),
                ));
            }
        }
    }
    Ok(flags)
}

/// `user_id`: absent or a string.
fn optional_user_id(obj: &Map<String, Value>) -> Result<Option<String>, FieldError> {
    match obj.get("user_id") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(user_id)) => Ok(Some(user_id.clone())),
        Some(other) => Err((
            "user_id",
            format!("expected a string, found {}", json_type(other)),
        )),
    }
}

/// `created_at` of a journal: the date it starts with, else its mtime.
pub(crate) fn journal_created_at(
    text: &str,
    mtime: Option<std::time::SystemTime>,
) -> Option<String> {
    let first = text.lines().next().unwrap_or("");
    let first = first.trim_start_matches(['#', '*', ' ', '\t', '\u{feff}']);
    let token = first.split_whitespace().next().unwrap_or("");
    if let Ok(ts) = DateTime::parse_from_rfc3339(token) {
        return Some(ts.to_rfc3339_opts(SecondsFormat::AutoSi, true));
    }
    if let Some(date) = first
        .get(..10)
        .and_then(|d| NaiveDate::parse_from_str(d, "%Y-%m-%d").ok())
    {
        let next = first[10..].chars().next();
        if next.is_none_or(|c| !c.is_ascii_alphanumeric()) {
            return Some(format!("{}T00:00:00Z", date.format("%Y-%m-%d")));
        }
    }
    let mtime: DateTime<Utc> = mtime?.into();
    Some(mtime.to_rfc3339_opts(SecondsFormat::Secs, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin() -> Origin {
        Origin {
            source: "in.jsonl".into(),
            line: 3,
        }
    }

    fn good() -> Map<String, Value> {
        serde_json::from_str(
            r#"{"id":"j-1","persona_id":"ada","kind":"journal","source_path":"j/1.md",
                "created_at":"2026-11-28T21:00:00Z","text":"Keep it short."}"#,
        )
        .unwrap()
    }

    #[test]
    fn the_required_fields_are_record_fields_and_each_is_checked() {
        assert_eq!(REQUIRED_FIELDS[..], RECORD_FIELDS[..REQUIRED_FIELDS.len()]);
        for field in REQUIRED_FIELDS {
            let mut map = good();
            map.remove(field);
            let reject = record_from_map(&map, origin(), &IngestOptions::default()).unwrap_err();
            assert_eq!(reject.field.as_deref(), Some(field), "{reject:?}");
        }
    }

    #[test]
    fn a_good_record_passes_and_its_fingerprint_ignores_position() {
        let r = record_from_map(&good(), origin(), &IngestOptions::default()).unwrap();
        let mut moved = r.clone();
        moved.origin.line = 99;
        assert_eq!(r.fingerprint(), moved.fingerprint());
        moved.text.push('!');
        assert_ne!(r.fingerprint(), moved.fingerprint());
    }

    #[test]
    fn each_broken_field_is_named() {
        let cases: [(&str, Value, &str); 7] = [
            ("kind", Value::from("diary"), "unknown kind"),
            ("created_at", Value::from("yesterday"), "RFC3339"),
            ("text", Value::from("  "), "empty"),
            ("text", Value::from(5), "expected a string"),
            ("persona_id", Value::Null, "missing"),
            ("flags", serde_json::json!(["secret"]), "unknown flag"),
            ("user_id", Value::from(1), "expected a string"),
        ];
        for (field, value, needle) in cases {
            let mut m = good();
            m.insert(field.into(), value);
            let e = record_from_map(&m, origin(), &IngestOptions::default()).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field));
            assert_eq!(e.record_id.as_deref(), Some("j-1"));
            assert!(e.error.contains(needle), "{field}: {}", e.error);
        }
    }

    #[test]
    fn over_long_text_is_rejected_not_truncated() {
        let mut m = good();
        m.insert("text".into(), Value::from("x".repeat(11)));
        let opts = IngestOptions {
            max_text_bytes: 10,
            ..Default::default()
        };
        let e = record_from_map(&m, origin(), &opts).unwrap_err();
        assert!(
            e.error.contains("11 bytes, over the limit of 10"),
            "{}",
            e.error
        );
    }

    #[test]
    fn record_id_is_sniffed_from_broken_json() {
        assert_eq!(
            sniff_record_id(br#"{"record_id": "j-011", "tags": [{"#, "record_id"),
            Some("j-011".into())
        );
        assert_eq!(sniff_record_id(br#"{"tags": 1"#, "record_id"), None);
    }

    #[test]
    fn journal_dates_come_from_the_first_line_else_mtime() {
        assert_eq!(
            journal_created_at("# 2026-11-28 standup\nok", None).as_deref(),
            Some("2026-11-28T00:00:00Z")
        );
        assert_eq!(
            journal_created_at("2026-11-28T09:15:00+01:00 woke up", None).as_deref(),
            Some("2026-11-28T09:15:00+01:00")
        );
        assert_eq!(journal_created_at("2026-11-288 not a date", None), None);
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(86_400);
        assert_eq!(
            journal_created_at("no date", Some(t)).as_deref(),
            Some("1970-01-02T00:00:00Z")
        );
    }
}
